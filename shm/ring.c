/* ring.c - one writer, N readers, per-slot sequence numbers (see ring.h). */
#include "disco/shm/ring.h"

#include <string.h>

#include "shm/ring_internal.h"
#include "shm/ticks.h"

#define SLOT_FIRST 1u /* first slot of a message: len is the whole length */
#define SLOT_CONT  2u /* continuation slot */

struct ring_slot {
    _Atomic uint64_t seq; /* position last written here */
    uint32_t len;         /* first slot: message length */
    uint32_t flags;
    unsigned char payload[];
};

struct ring_reader {
    /* The published line, which the writer scans. */
    _Alignas(64) _Atomic uint64_t cursor; /* slots below it are read */
    _Atomic uint32_t alive;               /* 1 live, 0 dead */
    _Atomic int32_t pid;
    /* The reader's own line: no other process touches it, so stepping
     * through a batch costs the writer nothing. Atomic only because one
     * reader index may move between threads (ring.h); relaxed throughout. */
    _Alignas(64) _Atomic uint64_t next; /* the position to read next */
};

struct disco_ring_shared {
    /* line 0: immutable after init */
    _Alignas(64) uint64_t magic;
    uint32_t layout;
    uint32_t nslots;
    uint32_t slot_size;
    uint32_t nreaders;
    uint32_t max_msg;
    uint32_t batch; /* readers publish every batch slots (ring.h) */
    uint64_t start_pos;
    /* line 1: the writer's */
    _Alignas(64) _Atomic uint64_t head;
    disco_waitq_t data_q;  /* line 2: readers park */
    disco_waitq_t space_q; /* line 3: the writer parks */
    struct ring_reader readers[];
};

_Static_assert(sizeof(struct ring_reader) == 2 * DISCO_CACHE_LINE, "reader lines");
_Static_assert(sizeof(struct disco_ring_shared) == 4 * DISCO_CACHE_LINE, "ring header");

static bool geometry_ok(const disco_ring_config_t *c)
{
    return c->nslots >= 2 && (c->nslots & (c->nslots - 1)) == 0 &&
           c->slot_size >= DISCO_CACHE_LINE && c->slot_size % DISCO_CACHE_LINE == 0 &&
           c->nreaders >= 1 && c->nreaders <= DISCO_RING_MAX_READERS && c->batch <= c->nslots / 2 &&
           (uint64_t)c->nslots * c->slot_size <= (1ULL << 40);
}

size_t disco_ring_footprint(const disco_ring_config_t *cfg)
{
    if (!geometry_ok(cfg))
        return 0;
    return sizeof(struct disco_ring_shared) + (size_t)cfg->nreaders * sizeof(struct ring_reader) +
           (size_t)cfg->nslots * cfg->slot_size;
}

/* Fills the handle from the geometry cfg, the one the caller checked
 * against the memory: never from the shared header again, which another
 * process may rewrite between the check and this (test_attach_geometry_
 * read_once). */
static void fill_handle(struct disco_ring_shared *sh, const disco_ring_config_t *cfg,
                        disco_ring_t *r)
{
    r->sh = sh;
    r->slots = (unsigned char *)&sh->readers[cfg->nreaders];
    r->mask = cfg->nslots - 1;
    r->slot_size = cfg->slot_size;
    r->payload = cfg->slot_size - DISCO_RING_SLOT_HDR;
    r->nreaders = cfg->nreaders;
    r->max_msg = cfg->max_msg;
    r->batch = cfg->batch > 1 ? cfg->batch : 1;
    r->min_seen = atomic_load_explicit(&sh->head, memory_order_relaxed) - cfg->nslots;
}

static inline struct ring_slot *slot_at(const disco_ring_t *r, uint64_t pos)
{
    return (struct ring_slot *)(r->slots + (size_t)(pos & r->mask) * r->slot_size);
}

/* Slots a message of len bytes takes. In 64 bits: len + payload - 1 wrapped
 * in 32 for len near UINT32_MAX (max_msg may be that large), giving 0 slots
 * and a "successful" write of nothing (test_huge_len_slot_count). */
static inline uint32_t msg_slots(const disco_ring_t *r, uint32_t len)
{
    return len == 0 ? 1 : (uint32_t)(((uint64_t)len + r->payload - 1) / r->payload);
}

disco_status_t disco_ring_init(void *mem, size_t mem_size, const disco_ring_config_t *cfg,
                               disco_ring_t *ring_out)
{
    size_t need = disco_ring_footprint(cfg);
    if (need == 0)
        return disco_set_error(DISCO_E_INVAL,
                               "ring geometry: %u slots of %u bytes, %u readers is invalid",
                               cfg->nslots, cfg->slot_size, cfg->nreaders);
    if (mem == NULL || ((uintptr_t)mem % DISCO_CACHE_LINE) != 0 || mem_size < need)
        return disco_set_error(
            DISCO_E_INVAL, "ring memory: %zu bytes given, %zu needed, aligned 64", mem_size, need);
    memset(mem, 0, need);
    struct disco_ring_shared *sh = mem;
    sh->magic = DISCO_RING_MAGIC;
    sh->layout = DISCO_RING_LAYOUT;
    sh->nslots = cfg->nslots;
    sh->slot_size = cfg->slot_size;
    sh->nreaders = cfg->nreaders;
    sh->max_msg = cfg->max_msg;
    sh->batch = cfg->batch;
    sh->start_pos = cfg->start_pos;
    /* Relaxed stores: nothing is shared yet; whoever shares the memory
     * (fork, or a handshake) orders these before any other process reads. */
    atomic_store_explicit(&sh->head, cfg->start_pos, memory_order_relaxed);
    for (uint32_t i = 0; i < cfg->nreaders; i++) {
        atomic_store_explicit(&sh->readers[i].cursor, cfg->start_pos, memory_order_relaxed);
        atomic_store_explicit(&sh->readers[i].next, cfg->start_pos, memory_order_relaxed);
        atomic_store_explicit(&sh->readers[i].alive, 1, memory_order_relaxed);
    }
    fill_handle(sh, cfg, ring_out);
    /* Each slot holds a position one lap behind the first one that maps to
     * it, so no reader mistakes it for fresh data. */
    for (uint64_t j = 0; j < cfg->nslots; j++) {
        uint64_t pos = cfg->start_pos + j;
        atomic_store_explicit(&slot_at(ring_out, pos)->seq, pos - cfg->nslots,
                              memory_order_relaxed);
    }
    return DISCO_OK;
}

disco_status_t disco_ring_attach(void *mem, size_t mem_size, disco_ring_t *ring_out)
{
    struct disco_ring_shared *sh = mem;
    if (mem == NULL || mem_size < sizeof *sh || sh->magic != DISCO_RING_MAGIC ||
        sh->layout != DISCO_RING_LAYOUT)
        return disco_set_error(DISCO_E_BAD_MAGIC, "no disco ring (layout %u) at %p",
                               DISCO_RING_LAYOUT, mem);
    /* Each field read once (volatile: one load each, never repeated by the
     * compiler): the geometry is checked and the handle made of these
     * copies, whatever another process writes meanwhile. */
    const volatile struct disco_ring_shared *v = sh;
    disco_ring_config_t cfg = {.nslots = v->nslots,
                               .slot_size = v->slot_size,
                               .nreaders = v->nreaders,
                               .max_msg = v->max_msg,
                               .batch = v->batch};
    size_t need = disco_ring_footprint(&cfg);
    if (need == 0 || need > mem_size)
        return disco_set_error(DISCO_E_BAD_MAGIC, "ring geometry needs %zu bytes, %zu mapped", need,
                               mem_size);
    fill_handle(sh, &cfg, ring_out);
    return DISCO_OK;
}

/* ---- writer ---- */

/* Lowest cursor among live readers, or `head` if none is alive. */
static uint64_t min_live_cursor(const disco_ring_t *r, uint64_t head)
{
    uint64_t min = head;
    for (uint32_t i = 0; i < r->nreaders; i++) {
        const struct ring_reader *rd = &r->sh->readers[i];
        /* Relaxed: a reader marked dead a moment late only delays us. */
        if (!atomic_load_explicit(&rd->alive, memory_order_relaxed))
            continue;
        /* W1: acquire, pairs with the reader's R2 release: its copy of the
         * slots below this cursor is complete before we overwrite them. */
        uint64_t c = atomic_load_explicit(&rd->cursor, memory_order_acquire);
        if ((int64_t)(c - min) < 0)
            min = c;
    }
    return min;
}

struct space_arg {
    disco_ring_t *r;
    uint64_t pos;
};

static bool has_space(void *p)
{
    struct space_arg *a = p;
    a->r->min_seen = min_live_cursor(a->r, a->pos);
    return a->pos - a->r->min_seen < (uint64_t)a->r->mask + 1;
}

static disco_status_t wait_space(disco_ring_t *r, uint64_t pos, const disco_wait_t *w)
{
    /* Fast path: the last scan already showed room. */
    if (pos - r->min_seen < (uint64_t)r->mask + 1)
        return DISCO_OK;
    struct space_arg a = {r, pos};
    return disco_wait_until(&r->sh->space_q, has_space, &a, w);
}

void disco__ring_writer_takeover(disco_ring_t *r)
{
    /* Relaxed: the old writer is stopped, so head has no other writer. */
    uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_relaxed);
    for (uint32_t i = 0; i < r->nreaders; i++) {
        /* Acquire, pairs with the reader's R2 release (as W1). */
        uint64_t c = atomic_load_explicit(&r->sh->readers[i].cursor, memory_order_acquire);
        if ((int64_t)(c - head) > 0)
            head = c;
    }
    atomic_store_explicit(&r->sh->head, head, memory_order_relaxed);
    r->min_seen = head;
}

disco_status_t disco_ring_write(disco_ring_t *r, const void *msg, uint32_t len,
                                const disco_wait_t *w)
{
    return disco__ring_write_stamped(r, msg, len, w, NULL);
}

disco_status_t disco__ring_write_stamped(disco_ring_t *r, const void *msg, uint32_t len,
                                         const disco_wait_t *w, uint64_t *published_at)
{
    if (len > r->max_msg)
        return disco_set_error(DISCO_E_MSG_TOO_BIG, "message of %u bytes, ring maximum is %u", len,
                               r->max_msg);
    /* Relaxed: only this writer stores head. */
    uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_relaxed);
    uint32_t nslots = msg_slots(r, len);
    disco_wait_t rest;
    if (w != NULL && w->no_wait) {
        /* no_wait: start only when the whole message fits now (one longer
         * than the ring: when the ring is empty), so DISCO_E_AGAIN always
         * means nothing written; the remaining slots then wait per the rest
         * of w. A partial write would tear the message (tests/test_ring.c
         * test_no_wait_write_is_all_or_nothing). */
        uint64_t need = nslots <= r->mask + 1 ? nslots : r->mask + 1;
        disco_status_t st = wait_space(r, head + need - 1, w);
        if (st != DISCO_OK)
            return st;
        rest = *w;
        rest.no_wait = false;
        w = &rest;
    }
    const unsigned char *src = msg;
    uint32_t left = len;
    for (uint32_t k = 0; k < nslots; k++) {
        uint64_t pos = head + k;
        disco_status_t st = wait_space(r, pos, w);
        if (st != DISCO_OK) {
            if (k != 0) /* a half-written message cannot be taken back */
                atomic_store_explicit(&r->sh->head, pos, memory_order_relaxed);
            return st;
        }
        struct ring_slot *s = slot_at(r, pos);
        uint32_t n = left < r->payload ? left : r->payload;
        s->len = k == 0 ? len : n;
        s->flags = k == 0 ? SLOT_FIRST : SLOT_CONT;
        if (n != 0)
            memcpy(s->payload, src, n);
        src += n;
        left -= n;
        /* W2: release, pairs with the reader's R1 acquire: the payload and
         * header above are visible before seq says the slot is ready. */
        atomic_store_explicit(&s->seq, pos, memory_order_release);
        /* Read before W3's fence, whose wait for the stores above it hides
         * most of the read's cost. */
        if (k == 0 && published_at != NULL)
            *published_at = disco__ticks();
        disco_waitq_wake(&r->sh->data_q); /* W3 */
    }
    /* Relaxed: head is only read by this writer (and by attach, before any
     * concurrent use). */
    atomic_store_explicit(&r->sh->head, head + nslots, memory_order_relaxed);
    return DISCO_OK;
}

/* ---- readers ---- */

struct data_arg {
    struct ring_slot *s;
    uint64_t pos;
};

static bool has_data(void *p)
{
    struct data_arg *a = p;
    /* R1: acquire, pairs with the writer's W2 release. A seq past pos means
     * the writer lapped us; stop waiting and let the caller report it. */
    uint64_t seq = atomic_load_explicit(&a->s->seq, memory_order_acquire);
    return (int64_t)(seq - a->pos) >= 0;
}

static disco_status_t wait_slot(disco_ring_t *r, uint32_t reader, uint64_t pos,
                                const disco_wait_t *w)
{
    struct data_arg a = {slot_at(r, pos), pos};
    disco_status_t st = disco_wait_until(&r->sh->data_q, has_data, &a, w);
    if (st != DISCO_OK)
        return st;
    /* Relaxed re-read: R1 already acquired this or a later value. */
    if (atomic_load_explicit(&a.s->seq, memory_order_relaxed) != pos)
        return disco_set_error(DISCO_E_BROKEN, "ring reader %u was lapped at position %llu", reader,
                               (unsigned long long)pos);
    return DISCO_OK;
}

static void publish(disco_ring_t *r, struct ring_reader *rd, uint64_t pos)
{
    /* R2: release, pairs with the writer's W1 acquire: our copy out of the
     * slots below pos is done before the writer may reuse them. */
    atomic_store_explicit(&rd->cursor, pos, memory_order_release);
    disco_waitq_wake(&r->sh->space_q); /* R3 */
}

/* The slot below pos is read: publish every batch slots (ring.h). */
static void advance(disco_ring_t *r, struct ring_reader *rd, uint64_t pos)
{
    atomic_store_explicit(&rd->next, pos, memory_order_relaxed);
    /* Relaxed: only this reader stores its cursor. */
    if (pos - atomic_load_explicit(&rd->cursor, memory_order_relaxed) >= r->batch)
        publish(r, rd, pos);
}

/* Before waiting for the slot at pos, publish what is read, so a writer
 * waiting for room is never held up by a reader waiting for data. */
static void publish_before_wait(disco_ring_t *r, struct ring_reader *rd, uint64_t pos)
{
    struct data_arg a = {slot_at(r, pos), pos};
    /* Relaxed: only this reader stores its cursor. */
    if (r->batch > 1 && atomic_load_explicit(&rd->cursor, memory_order_relaxed) != pos &&
        !has_data(&a))
        publish(r, rd, pos);
}

disco_status_t disco_ring_read(disco_ring_t *r, uint32_t reader, void *buf, uint32_t cap,
                               uint32_t *len_out, const disco_wait_t *w)
{
    if (reader >= r->nreaders)
        return disco_set_error(DISCO_E_INVAL, "reader %u of a ring with %u readers", reader,
                               r->nreaders);
    struct ring_reader *rd = &r->sh->readers[reader];
    /* Relaxed: only this reader stores next. */
    uint64_t pos = atomic_load_explicit(&rd->next, memory_order_relaxed);
    publish_before_wait(r, rd, pos);
    disco_status_t st = wait_slot(r, reader, pos, w);
    if (st != DISCO_OK)
        return st;
    struct ring_slot *s = slot_at(r, pos);
    if (s->flags != SLOT_FIRST || s->len > r->max_msg)
        return disco_set_error(DISCO_E_BROKEN, "ring reader %u: slot %llu is not a message start",
                               reader, (unsigned long long)pos);
    uint32_t len = s->len;
    if (len > cap) {
        *len_out = len;
        return disco_set_error(DISCO_E_BUF_TOO_SMALL, "message of %u bytes, buffer of %u", len,
                               cap);
    }
    disco_wait_t rest;
    if (w != NULL && w->no_wait && len > r->payload) {
        /* no_wait: take a spanning message only once all of it is published
         * (one longer than the ring: once it has begun), so DISCO_E_AGAIN
         * always means nothing consumed; the remaining slots then wait per
         * the rest of w. A half-read message would be torn
         * (tests/test_ring.c test_no_wait_read_whole). */
        uint32_t n = msg_slots(r, len);
        struct data_arg last = {slot_at(r, pos + n - 1), pos + n - 1};
        if (n <= r->mask + 1 && !has_data(&last))
            return DISCO_E_AGAIN;
        rest = *w;
        rest.no_wait = false;
        w = &rest;
    }
    unsigned char *dst = buf;
    uint32_t left = len;
    for (uint64_t k = 0;; k++) {
        uint32_t n = left < r->payload ? left : r->payload;
        if (n != 0)
            memcpy(dst, s->payload, n);
        dst += n;
        left -= n;
        advance(r, rd, pos + k + 1);
        if (left == 0)
            break;
        /* A spanning message: take each further slot as it is published. A
         * wait error here leaves the message half read, which only happens
         * when the writer died or the caller's deadline passed. */
        publish_before_wait(r, rd, pos + k + 1);
        if ((st = wait_slot(r, reader, pos + k + 1, w)) != DISCO_OK)
            return st;
        s = slot_at(r, pos + k + 1);
        if (s->flags != SLOT_CONT)
            return disco_set_error(DISCO_E_BROKEN, "ring reader %u: continuation slot missing",
                                   reader);
    }
    *len_out = len;
    return DISCO_OK;
}

/* ---- liveness ---- */

void disco_ring_set_reader_pid(disco_ring_t *r, uint32_t reader, pid_t pid)
{
    if (reader < r->nreaders) /* relaxed: informational */
        atomic_store_explicit(&r->sh->readers[reader].pid, pid, memory_order_relaxed);
}

pid_t disco_ring_reader_pid(const disco_ring_t *r, uint32_t reader)
{
    if (reader >= r->nreaders)
        return 0;
    return atomic_load_explicit(&r->sh->readers[reader].pid, memory_order_relaxed);
}

void disco_ring_mark_dead(disco_ring_t *r, uint32_t reader)
{
    if (reader >= r->nreaders)
        return;
    /* Relaxed: the writer's scan tolerates seeing it late; the wake below
     * makes a parked writer scan again. */
    atomic_store_explicit(&r->sh->readers[reader].alive, 0, memory_order_relaxed);
    disco_waitq_wake_all(&r->sh->space_q);
}

bool disco_ring_reader_alive(const disco_ring_t *r, uint32_t reader)
{
    return reader < r->nreaders &&
           atomic_load_explicit(&r->sh->readers[reader].alive, memory_order_relaxed) != 0;
}

uint32_t disco_ring_slowest_reader(const disco_ring_t *r)
{
    uint32_t who = UINT32_MAX;
    uint64_t min = 0;
    for (uint32_t i = 0; i < r->nreaders; i++) {
        const struct ring_reader *rd = &r->sh->readers[i];
        if (!atomic_load_explicit(&rd->alive, memory_order_relaxed))
            continue;
        uint64_t c = atomic_load_explicit(&rd->cursor, memory_order_relaxed);
        if (who == UINT32_MAX || (int64_t)(c - min) < 0) {
            who = i;
            min = c;
        }
    }
    return who;
}

void disco_ring_wake_all(disco_ring_t *r)
{
    disco_waitq_wake_all(&r->sh->data_q);
    disco_waitq_wake_all(&r->sh->space_q);
}

/* A hint only: a write-intent prefetch (prefetchw on x86; a no-op on CPUs
 * without it) of the slot the next message starts in. */
#if defined(__x86_64__)
__attribute__((target("prfchw")))
#endif
void disco_ring_prefetch_write(const disco_ring_t *r)
{
    /* Relaxed: only this writer stores head. */
    uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_relaxed);
    __builtin_prefetch(slot_at(r, head), 1, 3);
}

void disco_ring_prefetch_read(const disco_ring_t *r, uint32_t reader)
{
    if (reader >= r->nreaders)
        return;
    /* Relaxed: only this reader stores next. */
    uint64_t pos = atomic_load_explicit(&r->sh->readers[reader].next, memory_order_relaxed);
    __builtin_prefetch(slot_at(r, pos), 0, 3);
}
