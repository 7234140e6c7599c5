/* collective.c - the collective area, its barriers and marks, and one
 * collective call's barriers, go, giving up and end (see collective.h and
 * coll_call.h); the meeting is in collective_meet.c, the collectives
 * themselves in collective_ops.c. */
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
#include "workers/data/coll_meet.h"
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
    /* Release: pairs with the acquire of disco__coll_has_left; every write this
     * worker made in the command comes before it (Identity, collective.h). */
    atomic_store_explicit(
        &disco__coll_mark(w->coll, (uint32_t)w->world, (uint32_t)groups, (uint32_t)w->id)->at,
        DISCO__COLL_MARK(w->seq, DISCO__COLL_DONE), memory_order_release);
}

bool disco__coll_has_left(const struct disco_worker *w, int id)
{
    int groups = w->ngroups > 0 ? (int)w->ngroups : 1;
    /* Acquire: pairs with disco__coll_done's release (and a barrier mark's
     * of a later command). */
    return atomic_load_explicit(
               &disco__coll_mark(w->coll, (uint32_t)w->world, (uint32_t)groups, (uint32_t)id)->at,
               memory_order_acquire) >= DISCO__COLL_MARK(w->seq, DISCO__COLL_DONE);
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
    for (int r = 0; r < c->size; r++)
        if (c->base + r != c->w->id && disco__coll_has_left(c->w, c->base + r))
            return c->base + r;
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
disco_status_t disco__coll_gone_error(const struct disco__coll_call *c, int id)
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
        st = disco__coll_gone_error(c, a.gone);
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

/* A kind read from another process's slot: bounded before use. */
const char *disco__coll_kind_name(uint32_t k)
{
    return k < DISCO__K_COUNT ? kind_names[k] : "an unknown collective";
}

void disco__coll_begin(disco_ctx_t *ctx, bool in_group, enum disco__coll_kind kind,
                       struct disco__coll_call *c)
{
    disco_worker_t *w = ctx->worker;
    c->w = w;
    c->what = disco__coll_kind_name((uint32_t)kind);
    c->a = w->coll;
    /* The geometry is this process's own copy: the area's header is shared
     * memory that any member could overwrite. */
    int groups = w->ngroups > 0 ? (int)w->ngroups : 1;
    c->ngroups = groups;
    c->size = in_group ? disco__worker_group_size(w) : w->world;
    c->base = in_group ? w->id / c->size * c->size : 0;
    c->rank = w->id - c->base;
    c->bar = in_group ? &c->a->group_barrier[w->id / c->size] : &c->a->world_barrier;
    /* Every worker runs the same sequence of collectives, so the count's
     * parity agrees across members. Alternating slot sets lets a member that
     * finished start the next collective while others still read its slot. */
    c->parity = (uint32_t)(w->ncoll++ & 1);
    c->set = disco__coll_slot(c->a, (uint32_t)w->world, (uint32_t)groups, c->parity, 0);
    c->me = &c->set[w->id];
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
    c->me->kind = (uint32_t)kind;
    c->me->arg = 0;
    c->local = DISCO_OK;
    c->met = false;
    c->across = disco__worker_crosses(w, in_group);
    c->dev = false;
    c->owe_waits = false;
    c->by_flags = false;
    c->gave_up = DISCO_OK;
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

static bool is_late(struct disco__coll_call *c, int r, enum disco__late_by by)
{
    uint64_t v;
    if (by == DISCO__LATE_EVERYONE)
        return true;
    if (by == DISCO__LATE_ARRIVED)
        return !disco__coll_has_arrived(c, r, &v);
    /* Acquire: pairs with the member's release of its mark. */
    return atomic_load_explicit(&disco__coll_mark(c->a, (uint32_t)c->w->world, (uint32_t)c->ngroups,
                                                  (uint32_t)(c->base + r))
                                     ->at,
                                memory_order_acquire) <
           DISCO__COLL_MARK(c->w->seq, c->w->cmd_phase);
}

/* A2 and A3 (collective.h): the members that had not marked this barrier
 * (every other member, with everyone: device work, where marks do not tell
 * who still touches this member's bytes), handed to the worker's abandon
 * hook before anything of the call is freed; the call is given up. */
disco_status_t disco__coll_abandon_by(struct disco__coll_call *c, disco_status_t st,
                                      enum disco__late_by by)
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
    return disco__coll_abandon_by(c, st, everyone ? DISCO__LATE_EVERYONE : DISCO__LATE_MARKS);
}

/* Device ordering (coll_call.h): this member's stream waits for the last
 * record of every other member with an arena; owed until it has one. */
disco_status_t disco__coll_wait_members(struct disco__coll_call *c)
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
    disco_status_t wst = c->dev && !c->by_flags ? disco__coll_wait_members(c) : DISCO_OK;
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
        const struct disco__coll_slot *m = disco__coll_member(c, r);
        int32_t go = m->go;
        if (go != DISCO_OK)
            return disco__coll_posted_error(c, r, go);
    }
    *choice_out = disco__coll_member(c, 0)->choice;
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

disco_status_t disco__coll_posted_error(struct disco__coll_call *c, int r, int32_t st)
{
    const struct disco__coll_slot *m = disco__coll_member(c, r);
    char msg[sizeof m->msg]; /* another process's words: bounded, escaped */
    disco__text_safe(msg, sizeof msg, m->msg, sizeof m->msg);
    return disco_set_error(disco__coll_posted_status(st), "worker %d: %s", disco__coll_gid(c, r),
                           msg);
}
