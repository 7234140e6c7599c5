/* collective.c - the collective area, its barriers and marks, and one
 * collective call's meeting (see collective.h and coll_call.h); the
 * collectives themselves are in collective_ops.c. */
#include "workers/data/collective.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "shm/text.h"
#include "disco/dtype.h"
#include "disco/clock.h"
#include "workers/data/arena.h"
#include "workers/device/watch.h"
#include "workers/data/coll_call.h"
#include "workers/data/tensor_impl.h"
#include "workers/core/worker.h"

/* Bytes from the area's start to the device area (64-aligned). */
static size_t dev_area_at(uint32_t world, uint32_t num_groups)
{
    size_t at = sizeof(struct disco__coll_area) + num_groups * sizeof(struct disco__barrier) +
                2 * world * sizeof(struct disco__coll_slot) +
                world * sizeof(struct disco__coll_mark) + world * sizeof(struct disco__p2p);
    return (at + 63) / 64 * 64;
}

size_t disco__coll_footprint(uint32_t world, uint32_t num_groups)
{
    return dev_area_at(world, num_groups) + disco__dev_area_footprint(world);
}

struct disco__dev_area *disco__coll_dev_area(struct disco__coll_area *a, uint32_t world,
                                             uint32_t num_groups)
{
    return (struct disco__dev_area *)((char *)a + dev_area_at(world, num_groups));
}

void disco__coll_init(struct disco__coll_area *a, uint32_t world, uint32_t num_groups)
{
    a->world = world;
    a->num_groups = num_groups;
}

struct disco__coll_slot *disco__coll_slot(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t parity, uint32_t w)
{
    struct disco__coll_slot *slots = (struct disco__coll_slot *)&a->group_barrier[num_groups];
    return &slots[(parity & 1) * world + w];
}

struct disco__coll_mark *disco__coll_mark(struct disco__coll_area *a, uint32_t world,
                                          uint32_t num_groups, uint32_t w)
{
    return (struct disco__coll_mark *)disco__coll_slot(a, world, num_groups, 0, 2 * world) + w;
}

struct disco__p2p *disco__coll_p2p(struct disco__coll_area *a, uint32_t world, uint32_t num_groups,
                                   uint32_t w)
{
    return (struct disco__p2p *)disco__coll_mark(a, world, num_groups, world) + w;
}

void disco__coll_done(struct disco_worker *w)
{
    if (w->coll == NULL)
        return;
    int groups = w->ngroups > 0 ? (int)w->ngroups : 1;
    /* Release: pairs with the acquire of departed(); every write this
     * worker made in the command comes before it (Identity, collective.h). */
    atomic_store_explicit(
        &disco__coll_mark(w->coll, (uint32_t)w->world, (uint32_t)groups, (uint32_t)w->id)->at,
        DISCO__COLL_MARK(w->seq, DISCO__COLL_DONE), memory_order_release);
}

/* ---- barrier ---- */

struct gen_arg {
    struct disco__barrier *b;
    uint32_t gen;
    struct disco__coll_call *c; /* the call, to watch its members' marks */
    int gone;                   /* a member that ended the command, or -1 */
};

static bool gen_moved(void *p)
{
    struct gen_arg *a = p;
    /* Acquire: pairs with the last arriver's acq_rel swap, which read every
     * earlier arrival (each acq_rel), so every member's slot and data
     * writes before arriving are visible. */
    return (uint32_t)(atomic_load_explicit(&a->b->state, memory_order_acquire) >> 32) != a->gen;
}

/* The first member of c (not this one) whose mark says it ended the
 * command (or went on past it) without arriving, or -1. */
static int departed(struct disco__coll_call *c)
{
    uint64_t done = DISCO__COLL_MARK(c->w->seq, DISCO__COLL_DONE);
    for (int r = 0; r < c->size; r++) {
        int id = c->base + r;
        /* Acquire: pairs with disco__coll_done's release (and a barrier
         * mark's of a later command). */
        if (id != c->w->id &&
            atomic_load_explicit(
                &disco__coll_mark(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups, (uint32_t)id)
                     ->at,
                memory_order_acquire) >= done)
            return id;
    }
    return -1;
}

/* The barrier passed, or a member left: checked departure first, so that a
 * member that left after passing (its done mark read with acquire) implies
 * the generation's move is visible to the load that follows. */
static bool gen_moved_or_gone(void *p)
{
    struct gen_arg *a = p;
    if (a->c != NULL && a->gone < 0)
        a->gone = departed(a->c);
    return gen_moved(a) || a->gone >= 0;
}

/* Why member id left the command: its own failure in this command, read
 * from its error box (the boxes are one array in the control segment;
 * another process's words: bounded and escaped), else that it returned
 * early or called fewer collectives. */
static void gone_why(const struct disco__coll_call *c, int id, char *out, size_t cap)
{
    snprintf(out, cap, "it returned early, or called fewer collectives");
    if (c->w->errbox == NULL)
        return;
    const struct disco__errbox *b = c->w->errbox - c->w->id + id;
    /* Acquire: pairs with the member's release of full; its done mark,
     * read before with acquire, came after. */
    if (!atomic_load_explicit(&b->full, memory_order_acquire) || b->seq != c->w->seq)
        return;
    char msg[128];
    disco__text_safe(msg, sizeof msg, b->msg, sizeof b->msg);
    snprintf(out, cap, "it failed first: %s", msg);
}

/* The error of a call that member id left without calling it. */
static disco_status_t gone_error(const struct disco__coll_call *c, int id)
{
    char why[192];
    gone_why(c, id, why, sizeof why);
    return disco_set_error(DISCO_E_MISMATCH,
                           "%s (collective %u of command %llu): worker %d ended the command "
                           "without calling it (%s)",
                           c->what, c->index, (unsigned long long)c->w->seq, id + c->w->gid_base,
                           why);
}

/* Arrives and waits for the others (see collective.h). On a failed wait,
 * withdraws the arrival (A1) and returns the wait's status; returns
 * DISCO_OK if the barrier was passed, even as the wait gave up. With c, a
 * member of c that ends the command without arriving fails the wait with
 * DISCO_E_MISMATCH naming it. */
static disco_status_t barrier_wait(struct disco__barrier *b, uint32_t n, const disco_wait_t *w,
                                   struct disco__coll_call *c)
{
    /* Relaxed: only a first guess for the swap, which reads the latest. */
    uint64_t cur = atomic_load_explicit(&b->state, memory_order_relaxed), next;
    do /* acq_rel: our writes are released to the last arriver, and the last
        * arriver acquires everyone's before it starts the next generation. */
        next = (uint32_t)cur == n - 1 ? ((cur >> 32) + 1) << 32 : cur + 1;
    while (!atomic_compare_exchange_weak_explicit(&b->state, &cur, next, memory_order_acq_rel,
                                                  memory_order_relaxed));
    uint32_t gen = (uint32_t)(cur >> 32);
    if ((uint32_t)cur == n - 1) {
        disco_waitq_wake(&b->q);
        return DISCO_OK;
    }
    struct gen_arg a = {b, gen, c, -1};
    disco_status_t st = disco_wait_until(&b->q, gen_moved_or_gone, &a, w);
    if (st == DISCO_OK && a.gone < 0)
        return DISCO_OK;
    if (st == DISCO_OK && gen_moved(&a))
        return DISCO_OK; /* passed: the member left after the barrier */
    if (st == DISCO_OK)
        st = gone_error(c, a.gone);
    /* A1. Acquire (load and failed swaps): if the generation moved, we
     * passed and need the others' writes, as gen_moved does. acq_rel on
     * success: a withdrawal is an arrival undone, ordered like one. */
    cur = atomic_load_explicit(&b->state, memory_order_acquire);
    while ((uint32_t)(cur >> 32) == gen)
        if (atomic_compare_exchange_weak_explicit(&b->state, &cur, cur - 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return st;
    return DISCO_OK;
}

/* ---- one collective call (coll_call.h) ---- */

static const char *const kind_names[DISCO__K_COUNT] = {
    [DISCO__K_OTHER] = "another collective",     [DISCO__K_ALLREDUCE] = "allreduce",
    [DISCO__K_ALLGATHER] = "allgather",          [DISCO__K_BROADCAST] = "broadcast_from_worker0",
    [DISCO__K_SCATTER] = "scatter_from_worker0", [DISCO__K_GATHER] = "gather_to_worker0",
    [DISCO__K_SEND_RECV] = "send_recv",          [DISCO__K_BARRIER] = "barrier",
    [DISCO__K_BCAST_ROOT] = "broadcast",
};

static uint32_t kind_of(const char *what)
{
    for (uint32_t k = 1; k < DISCO__K_COUNT; k++)
        if (strcmp(kind_names[k], what) == 0)
            return k;
    return DISCO__K_OTHER;
}

/* A kind read from another process's slot: bounded before use. */
static const char *kind_name(uint32_t k)
{
    return k < DISCO__K_COUNT ? kind_names[k] : "an unknown collective";
}

void disco__coll_begin(disco_ctx_t *ctx, bool in_group, const char *what,
                       struct disco__coll_call *c)
{
    disco_worker_t *w = ctx->worker;
    c->w = w;
    c->what = what;
    c->a = w->coll;
    /* The geometry is this process's own copy: the area's header is shared
     * memory that any member could overwrite. */
    int groups = w->ngroups > 0 ? (int)w->ngroups : 1;
    c->ngroups = groups;
    c->size = in_group ? w->world / groups : w->world;
    c->base = in_group ? w->id / c->size * c->size : 0;
    c->rank = w->id - c->base;
    c->bar = in_group ? &c->a->group_barrier[w->id / c->size] : &c->a->world_barrier;
    /* Every worker runs the same sequence of collectives, so the count's
     * parity agrees across members. Alternating slot sets lets a member that
     * finished start the next collective while others still read its slot. */
    c->parity = (uint32_t)(w->ncoll++ & 1);
    c->me =
        disco__coll_slot(c->a, (uint32_t)w->world, (uint32_t)groups, c->parity, (uint32_t)w->id);
    /* Not arrive (it keeps an older call's tag until disco__coll_meet
     * stores this one's), nor msg (read only after a failed status or go),
     * nor data (read only when inline is set): the fewer lines written,
     * the fewer a peer must fetch at the meeting. */
    memset(&c->me->seq, 0,
           offsetof(struct disco__coll_slot, msg) - offsetof(struct disco__coll_slot, seq));
    c->me->msg[0] = '\0';
    c->me->seq = w->seq;
    c->index = w->cmd_coll++;
    c->me->index = c->index;
    c->me->kind = kind_of(what);
    c->me->arg = 0;
    c->local = DISCO_OK;
    c->met = false;
    c->across = disco__worker_crosses(w, in_group);
    c->dev = false;
    c->owe_waits = false;
    c->by_flags = false;
    c->gave_up = DISCO_OK;
}

static struct disco__coll_slot *member(struct disco__coll_call *c, int rank)
{
    return disco__coll_slot(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups, c->parity,
                            (uint32_t)(c->base + rank));
}

/* A status a member posted: one of ours (an error), else DISCO_E_PROTOCOL. */
static disco_status_t posted_status(int32_t st)
{
    return disco__status_is_error(st) ? (disco_status_t)st : DISCO_E_PROTOCOL;
}

/* Records this member's failure (the first one) for everyone to see. */
void disco__coll_fail(struct disco__coll_call *c, disco_status_t st, const char *msg)
{
    if (c->local != DISCO_OK)
        return;
    c->local = st;
    c->me->status = st;
    snprintf(c->me->msg, sizeof c->me->msg, "%s", msg);
}

void disco__coll_post_tensor(struct disco__coll_call *c, const DLTensor *t, bool out)
{
    if (out) {
        c->me->out_block = disco__tensor_block(t);
        c->me->out_off = disco__tensor_byte_offset(t);
        return;
    }
    c->me->in_block = disco__tensor_block(t);
    c->me->in_off = disco__tensor_byte_offset(t);
    c->me->dev_type = t->device.device_type == kDLCPU ? 0 : (uint32_t)t->device.device_type;
    c->me->dtype = t->dtype;
    c->me->ndim = t->ndim;
    memcpy(c->me->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

/* A2 and A3 (collective.h): the members that had not marked this barrier
 * (every other member, with everyone: device work, where marks do not tell
 * who still touches this member's bytes), handed to the worker's abandon
 * hook before anything of the call is freed; the call is given up. */
static uint64_t call_tag(const struct disco__coll_call *c)
{
    return DISCO__COLL_TAG(c->w->seq, c->index);
}

/* Whether member r stored this call's arrive word (either flag). */
static bool has_arrived(struct disco__coll_call *c, int r, uint64_t *word_out)
{
    /* Acquire: pairs with the member's release store in disco__coll_meet,
     * after its post (and inline bytes). */
    uint64_t v = atomic_load_explicit(&member(c, r)->arrive, memory_order_acquire);
    *word_out = v;
    return v >> 1 == call_tag(c);
}

/* The late, by how the call is given up: everyone (device work), the
 * members not yet arrived at an inline meeting (arrived), or those whose
 * marks are older than this barrier's. */
enum late_by { LATE_MARKS, LATE_EVERYONE, LATE_ARRIVED };

static bool is_late(struct disco__coll_call *c, int r, enum late_by by)
{
    uint64_t v;
    if (by == LATE_EVERYONE)
        return true;
    if (by == LATE_ARRIVED)
        return !has_arrived(c, r, &v);
    /* Acquire: pairs with the member's release of its mark. */
    return atomic_load_explicit(&disco__coll_mark(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups,
                                                  (uint32_t)(c->base + r))
                                     ->at,
                                memory_order_acquire) <
           DISCO__COLL_MARK(c->w->seq, c->w->cmd_phase);
}

static disco_status_t abandon_by(struct disco__coll_call *c, disco_status_t st, enum late_by by)
{
    int late[DISCO_MAX_WORKERS], nlate = 0;
    for (int r = 0; r < c->size; r++)
        if (c->base + r != c->w->id && is_late(c, r, by))
            late[nlate++] = c->base + r;
    c->gave_up =
        c->w->abandon == NULL ? st : c->w->abandon(c->w->abandon_ctx, st, late, nlate, c->what);
    return c->gave_up;
}

static disco_status_t abandon(struct disco__coll_call *c, disco_status_t st, bool everyone)
{
    return abandon_by(c, st, everyone ? LATE_EVERYONE : LATE_MARKS);
}

/* Device ordering (coll_call.h): this member's stream waits for the last
 * record of every other member with an arena; owed until it has one. */
static disco_status_t wait_for_members(struct disco__coll_call *c)
{
    struct disco__arena *a = c->w->arena;
    c->owe_waits = a == NULL;
    disco_status_t st = DISCO_OK;
    for (int r = 0; r < c->size && a != NULL; r++) {
        int id = c->base + r;
        if (id == c->w->id || !disco__arena_peer_ready(a, id))
            continue; /* no arena: nothing of its can be touched */
        disco_status_t one = disco__arena_wait_for(a, id);
        if (one != DISCO_OK && st == DISCO_OK)
            st = one;
    }
    return st;
}

/* Device ordering before arriving: record what this member queued. A
 * failed record is this member's error; its stream is then synced on the
 * host so that the peers' reads are still ordered after its writes. */
static disco_status_t record_mine(struct disco__coll_call *c)
{
    struct disco__arena *a = c->w->arena;
    if (a == NULL || c->by_flags || (!c->dev && c->me->dev_type == 0))
        return DISCO_OK;
    disco_status_t st = disco__arena_record(a);
    if (st != DISCO_OK) {
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        (void)disco__arena_sync(a);
        st = disco_set_error(st, "%s", why);
    }
    return st;
}

/* Marks this member's arrival at its next barrier, then arrives and waits;
 * a failed wait gives the collective up (A1-A3). */
disco_status_t disco__coll_barrier(struct disco__coll_call *c)
{
    if (c->gave_up != DISCO_OK) /* the others were handed to the hook */
        return c->gave_up;
    disco_status_t rst = record_mine(c);
    c->w->cmd_phase++;
    /* Release: this phase's writes (our slot, our part of the others'
     * outputs) come before the mark that says we are done with them. */
    atomic_store_explicit(
        &disco__coll_mark(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups, (uint32_t)c->w->id)
             ->at,
        DISCO__COLL_MARK(c->w->seq, c->w->cmd_phase), memory_order_release);
    disco_status_t st = barrier_wait(c->bar, (uint32_t)c->size, c->w->wait, c);
    if (st != DISCO_OK)
        return abandon(c, st, false);
    disco_status_t wst = c->dev && !c->by_flags ? wait_for_members(c) : DISCO_OK;
    return rst != DISCO_OK ? rst : wst;
}

disco_status_t disco__coll_go(struct disco__coll_call *c, disco_status_t mine, uint32_t choice,
                              uint32_t *choice_out)
{
    c->me->go = mine;
    c->me->choice = choice;
    if (mine != DISCO_OK)
        snprintf(c->me->msg, sizeof c->me->msg, "%s", disco_last_error());
    /* The barrier orders these writes before the others' reads (its
     * acq_rel arrival and acquire wait, as for the posts). */
    disco_status_t st = disco__coll_barrier(c);
    if (st != DISCO_OK)
        return st;
    for (int r = 0; r < c->size; r++) {
        const struct disco__coll_slot *m = member(c, r);
        int32_t go = m->go;
        if (go != DISCO_OK) { /* another process's words: bounded, escaped */
            char msg[sizeof m->msg];
            disco__text_safe(msg, sizeof msg, m->msg, sizeof m->msg);
            return disco_set_error(posted_status(go), "worker %d: %s", c->base + r, msg);
        }
    }
    *choice_out = member(c, 0)->choice;
    return DISCO_OK;
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

disco_status_t disco__coll_dev_sync(struct disco__coll_call *c)
{
    disco_wait_t w = *c->w->wait;
    if (w.deadline_ns == 0 && w.timeout_ns > 0) /* the watch looks at deadlines only */
        w.deadline_ns = disco_now_ns() + w.timeout_ns;
    const disco_wait_t *old = disco__device_watch(&w);
    disco_status_t st = disco__arena_sync(c->w->arena);
    disco_status_t fired = disco__device_watch_fired();
    disco__device_watch(old);
    if (st == DISCO_OK || c->w->abandon == NULL)
        return st;
    /* The verdict on a death is the controller's, as at a barrier: a sync
     * that failed because a peer died (the sim sees a dead recorder itself)
     * must report the death, not this member's failure. A worker process
     * waits for the verdict as its barrier waits do (the session's abort
     * word, the controller's end). Worker 0 (the controller) waits for its
     * liveness check to name the dead for a second at most (the sim's own
     * look at a dying process can come before the check's: seen in the
     * soak under ASan); if none is named, the sync's own error stands. A
     * sync the watch ended has its verdict already. */
    if (fired == DISCO_OK) { /* else the watch ended the sync: that is the verdict */
        char why[DISCO_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", disco_last_error());
        int64_t grace = disco_now_ns() + 1000000000;
        if (c->w->id == 0 && (w.deadline_ns == 0 || w.deadline_ns > grace))
            w.deadline_ns = grace;
        disco_status_t verdict = disco_wait_until(NULL, never, NULL, &w);
        bool named = verdict != DISCO_E_TIMEOUT || c->w->id != 0 || disco_now_ns() < grace;
        st = named ? verdict : disco_set_error(st, "%s", why);
    }
    return abandon(c, st, true);
}

disco_status_t disco__coll_give_up(struct disco__coll_call *c, disco_status_t st)
{
    return abandon(c, st, true);
}

disco_status_t disco__coll_end(struct disco__coll_call *c, disco_status_t st)
{
    if (st == DISCO_OK || c->met) {
        disco_status_t bst = disco__coll_barrier(c);
        if (st == DISCO_OK)
            st = bst;
    }
    if (c->dev && c->w->arena != NULL && c->gave_up == DISCO_OK) {
        disco_status_t sst = disco__coll_dev_sync(c);
        if (st == DISCO_OK)
            st = sst;
    }
    return st;
}

/* Copies member r's slot into c->post[r] and checks its numbers: the rank
 * count, every dimension, and the byte count (no overflow). */
static disco_status_t take_post(struct disco__coll_call *c, int r)
{
    const struct disco__coll_slot *m = member(c, r);
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
                               c->what, c->base + r, (int)p->ndim);
    p->nbytes = n;
    p->inl = m->inl != 0;
    if (p->inl && n > DISCO__COLL_INLINE_MAX)
        return disco_set_error(DISCO_E_PROTOCOL,
                               "%s: worker %d posted %llu bytes inline (at most %u)", c->what,
                               c->base + r, (unsigned long long)n, DISCO__COLL_INLINE_MAX);
    return DISCO_OK;
}

const void *disco__coll_inline(struct disco__coll_call *c, int rank)
{
    return member(c, rank)->data;
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
        if (!has_arrived(c, r, &v)) {
            /* Acquire: pairs with disco__coll_done's release. Its arrive
             * word is read again after it, so a member that arrived and
             * then left is not taken for one that never came. */
            uint64_t done = DISCO__COLL_MARK(c->w->seq, DISCO__COLL_DONE);
            if (atomic_load_explicit(&disco__coll_mark(c->a, (uint32_t)c->w->world,
                                                       (uint32_t)c->ngroups,
                                                       (uint32_t)(c->base + r))
                                          ->at,
                                     memory_order_acquire) >= done &&
                !has_arrived(c, r, &v)) {
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
        const char *m = (const char *)member(c, r);
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
        st = gone_error(c, a.gone);
    if (st != DISCO_OK)
        return abandon_by(c, st, LATE_ARRIVED);
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
    atomic_store_explicit(&c->me->arrive, DISCO__COLL_ARRIVE(call_tag(c), inl),
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
         * the queue, and a member whose wait failed wakes it too. */
        disco_waitq_wake(&c->bar->q);
    }
    if (st == DISCO_OK && !all_inline) /* F3, or a member that posted no inline bytes */
        st = disco__coll_barrier(c);
    if (st != DISCO_OK)
        return st;
    for (int r = 0; r < c->size; r++) {
        struct disco__coll_slot *m = member(c, r);
        if (m->seq != c->w->seq)
            return disco_set_error(DISCO_E_PROTOCOL, "worker %d is at another command",
                                   c->base + r);
        uint32_t kind = m->kind, index = m->index;
        if (kind != c->me->kind || index != c->index)
            return disco_set_error(DISCO_E_MISMATCH,
                                   "worker %d called %s as its collective %u of the command, "
                                   "worker %d %s as its %u",
                                   c->base + r + c->w->gid_base, kind_name(kind), index,
                                   c->w->id + c->w->gid_base, kind_name(c->me->kind), c->index);
        int32_t arg = m->arg;
        if (arg != c->me->arg)
            return disco_set_error(DISCO_E_MISMATCH, "%s: worker %d gave %s %d, worker %d %d",
                                   c->what, c->base + r + c->w->gid_base,
                                   c->me->kind == DISCO__K_ALLREDUCE ? "op" : "root", (int)arg,
                                   c->w->id + c->w->gid_base, (int)c->me->arg);
        int32_t mst = m->status;
        if (mst != DISCO_OK) { /* another process's words: bounded, escaped */
            char msg[sizeof m->msg];
            disco__text_safe(msg, sizeof msg, m->msg, sizeof m->msg);
            return disco_set_error(posted_status(mst), "worker %d: %s", c->base + r, msg);
        }
        if ((st = take_post(c, r)) != DISCO_OK)
            return st;
    }
    c->met = true;
    for (int r = 0; r < c->size; r++)
        c->dev = c->dev || c->post[r].dev_type != 0;
    return c->dev && !c->by_flags ? wait_for_members(c) : DISCO_OK;
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
            c->what, c->base + r, out ? "output" : "input",
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
                               c->what, c->base + r, c->w->id);
    void *ptr;
    disco_status_t st = c->owe_waits ? wait_for_members(c) : DISCO_OK;
    if (st == DISCO_OK)
        st = disco__arena_peer(c->w->arena, c->base + r, at, len, &ptr, dev_out);
    if (st == DISCO_OK)
        *p_out = ptr;
    return st;
}

/* "[2, 3]" of a shape (ndim checked in range by take_post), cut to cap. */
static const char *shape_str(const int64_t *shape, int ndim, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && used < cap; d++) {
        int k = snprintf(out + used, cap - used, "%s%lld", d ? ", " : "[", (long long)shape[d]);
        used += k > 0 ? (size_t)k : 0;
    }
    if (used < cap)
        snprintf(out + used, cap - used, "%s", ndim ? "]" : "[]");
    return out;
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
            return disco_set_error(DISCO_E_MISMATCH,
                                   "worker %d has a %s tensor of shape %s (device type %u), worker "
                                   "%d a %s of shape %s (device type %u)",
                                   c->base + r, disco_dtype_str(m->dtype, a, sizeof a),
                                   shape_str(m->shape, m->ndim, sa, sizeof sa), m->dev_type,
                                   c->w->id, disco_dtype_str(c->me->dtype, b, sizeof b),
                                   shape_str(c->me->shape, c->me->ndim, sb, sizeof sb),
                                   c->me->dev_type);
        }
    }
    return DISCO_OK;
}
